// hlo2dace's C++ helpers: 16-bit floats and the 8-, 6- and 4-bit ones: conversions as XLA's (and ml_dtypes') round; narrow integers.
// (Included through h2d/ops.h; each topic header builds on the one before it.)
#pragma once

#include "core.h"

namespace h2d {

// ------------------------------------------------------------------ 16-bit floats
#if defined(__CUDA_ARCH__)
// nvcc's device compiler has no _Float16 (an internal error): CUDA's own conversions, which
// round to nearest even as the host's do
H2D_FN inline float f16_to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
H2D_FN inline uint16_t float_to_f16(float x) { return __half_as_ushort(__float2half_rn(x)); }
H2D_FN inline float round_f16(float x) { return __half2float(__float2half_rn(x)); }
#else
// An f16 value is held in a float exactly: a signalling NaN stays one, so that negation,
// selection and bitcasts keep its bits, as XLA's f16 ops do (`convert` to and from other
// float types quietens it, as XLA's conversions do: elementwise.py). Numbers round to
// nearest even. Integer and float operations rather than _Float16's conversions: without
// AVX512-FP16, GCC (12 at least) converts _Float16 one element at a time, and a loop with
// one such conversion is not vectorised (f16 arithmetic ran at 35x XLA's time). These
// `_bits` functions are the conversions without F16C and the NaN lanes' with it. Other than
// on signalling NaNs these give F16C's bits (vcvtph2ps, vcvtps2ph) for all 2^16 halves and
// 2^32 floats, with and without FTZ/DAZ (tests/test_f16_conversions.py). Selects by `blend`:
// with `?:` GCC branches where an operand is itself a select (a max), and the loop stays
// scalar.
H2D_FN inline float f16_to_float_bits(uint32_t bits) {
    const uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    const uint32_t shifted = (uint32_t)(bits & 0x7fffu) << 13;  // exponent and mantissa
    const float normal = bit_cast<float>(shifted + (112u << 23));  // rebiased: 127 - 15
    // a subnormal's mantissa, as 2^-14 (1 + m/1024) - 2^-14: exact, and normal in float
    const float subnormal = bit_cast<float>(shifted + (113u << 23)) - bit_cast<float>(113u << 23);
    uint32_t r = bit_cast<uint32_t>(blend(shifted < (1u << 23), subnormal, normal));
    r = blend(shifted >= (0x1fu << 23), shifted | 0x7f800000u, r);  // infinity, NaN
    return bit_cast<float>(r | sign);
}
// a float NaN's top 10 payload bits, or f16's quiet NaN where those are zero
H2D_FN inline uint32_t f16_nan_of(uint32_t magnitude) {
    return blend((magnitude & 0x7fe000u) != 0, (magnitude >> 13) & 0x3ffu, 0x200u) | 0x7c00u;
}
H2D_FN inline uint32_t float_to_f16_bits(float x) {
    const uint32_t u = bit_cast<uint32_t>(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    // normal: the mantissa rounded to 10 bits, ties to even, the exponent rebiased
    const uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13;
    // below 2^-14: 0.5 + |x| rounds |x| to a multiple of 2^-24, which is the low bits
    const uint32_t subnormal = bit_cast<uint32_t>(bit_cast<float>(a) + 0.5f) - 0x3f000000u;
    uint32_t r = blend(a < 0x38800000u, subnormal, normal);
    r = blend(a >= 0x477ff000u, 0x7c00u, r);  // 65520 and up: inf
    r = blend(a > 0x7f800000u, f16_nan_of(a), r);
    return r | sign;
}
// float_to_f16 then f16_to_float, in float's bits
H2D_FN inline float round_f16_bits(float x) {
    const uint32_t u = bit_cast<uint32_t>(x), sign = u & 0x80000000u, a = u ^ sign;
    const uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
    const uint32_t subnormal = bit_cast<uint32_t>((bit_cast<float>(a) + 0.5f) - 0.5f);
    uint32_t r = blend(a < 0x38800000u, subnormal, normal);
    r = blend(a >= 0x477ff000u, 0x7f800000u, r);
    r = blend(a > 0x7f800000u, f16_nan_of(a) << 13 | 0x7f800000u, r);
    return bit_cast<float>(r | sign);
}

#if defined(__F16C__) && !defined(__CUDACC__)
// With F16C (x86 since 2012), the conversions are its instructions, as XLA's code uses
// them: GCC does not vectorise them in a loop (nor _Float16), so they are vector functions
// that GCC's vectoriser calls (the `simd` attribute, as libmvec's are; the variants below,
// named by the vector ABI: b SSE, c AVX, d AVX2, e AVX-512). A lane holding a NaN takes
// the exact path above (F16C quietens a signalling NaN): the results are those bits for
// every input. An f16 expression of 8 ops over 1M elements: 5.1 ms with the integer and
// float operations alone, 2.1 ms with these (XLA 0.9: it converts inline, where our loops
// call a function for each 16 lanes).
#include <immintrin.h>
#define H2D_F16C_FUNCTION(name, result, parameter) \
    extern "C" result name(parameter) __asm__(#name) \
        __attribute__((simd("notinbranch"), const, nothrow));
H2D_F16C_FUNCTION(h2d_f16_to_float, float, uint32_t)
H2D_F16C_FUNCTION(h2d_float_to_f16, uint32_t, float)
H2D_F16C_FUNCTION(h2d_round_f16, float, float)
#undef H2D_F16C_FUNCTION
namespace f16c {
// a vector function's definition, under the symbol its declaration's variant has: hidden
// (each program's own), and emitted wherever the prelude is (inline: one copy is kept)
#define H2D_F16C_VARIANT(symbol, result, parameter) \
    extern "C" __attribute__((used, visibility("hidden"))) inline result symbol##_( \
        parameter x) __asm__(#symbol); \
    inline result symbol##_(parameter x)
// the lanes of v whose bit is set in `lanes` computed by `exact`, one by one
template <typename R, typename V, typename F>
inline R with_exact_lanes(R converted, V v, unsigned lanes, F exact) {
    constexpr int count = sizeof(R) / 4;
    uint32_t in[count], out[count];
    std::memcpy(in, &v, sizeof(in));
    std::memcpy(out, &converted, sizeof(out));
    for (int i = 0; i < count; i++)
        if (lanes >> i & 1) out[i] = bit_cast<uint32_t>(exact(in[i]));
    std::memcpy(&converted, out, sizeof(out));
    return converted;
}
inline float f16_to_float_lane(uint32_t h) { return f16_to_float_bits(h); }
inline uint32_t float_to_f16_lane(uint32_t f) { return float_to_f16_bits(bit_cast<float>(f)); }
inline float round_f16_lane(uint32_t f) { return round_f16_bits(bit_cast<float>(f)); }
// NaN lanes: of f16 bits held in 32-bit lanes, or of floats
inline unsigned f16_nans(__m128i h) {
    return _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(
        _mm_and_si128(h, _mm_set1_epi32(0x7fff)), _mm_set1_epi32(0x7c00))));
}
inline unsigned float_nans(__m128 x) { return _mm_movemask_ps(_mm_cmpunord_ps(x, x)); }
H2D_F16C_VARIANT(_ZGVbN4v_h2d_f16_to_float, __m128, __m128i) {
    const __m128 r = _mm_cvtph_ps(_mm_packus_epi32(x, x));
    const unsigned nans = f16_nans(x);
    return nans ? with_exact_lanes(r, x, nans, f16_to_float_lane) : r;
}
H2D_F16C_VARIANT(_ZGVbN4v_h2d_float_to_f16, __m128i, __m128) {
    const __m128i r = _mm_cvtepu16_epi32(_mm_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const unsigned nans = float_nans(x);
    return nans ? with_exact_lanes(r, x, nans, float_to_f16_lane) : r;
}
H2D_F16C_VARIANT(_ZGVbN4v_h2d_round_f16, __m128, __m128) {
    const __m128 r = _mm_cvtph_ps(_mm_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const unsigned nans = float_nans(x);
    return nans ? with_exact_lanes(r, x, nans, round_f16_lane) : r;
}
#if defined(__AVX__)
inline unsigned float_nans(__m256 x) {
    return _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
inline __m256 f16_to_float_8(__m128i low, __m128i high, __m256i bits) {
    const __m256 r = _mm256_cvtph_ps(_mm_packus_epi32(low, high));
    const unsigned nans = f16_nans(low) | f16_nans(high) << 4;
    return nans ? with_exact_lanes(r, bits, nans, f16_to_float_lane) : r;
}
H2D_F16C_VARIANT(_ZGVcN8v_h2d_round_f16, __m256, __m256) {
    const __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const unsigned nans = float_nans(x);
    return nans ? with_exact_lanes(r, x, nans, round_f16_lane) : r;
}
// AVX's vector ABI: 8 integers in two 128-bit halves; an integer result of 4 lanes
extern "C" __attribute__((used, visibility("hidden"))) inline __m256
    f16_to_float_c8(__m128i low, __m128i high) __asm__("_ZGVcN8v_h2d_f16_to_float");
inline __m256 f16_to_float_c8(__m128i low, __m128i high) {
    return f16_to_float_8(low, high, _mm256_set_m128i(high, low));
}
H2D_F16C_VARIANT(_ZGVcN4v_h2d_float_to_f16, __m128i, __m128) {
    return _ZGVbN4v_h2d_float_to_f16_(x);
}
#endif
#if defined(__AVX2__)
H2D_F16C_VARIANT(_ZGVdN8v_h2d_f16_to_float, __m256, __m256i) {
    return f16_to_float_8(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1), x);
}
H2D_F16C_VARIANT(_ZGVdN8v_h2d_float_to_f16, __m256i, __m256) {
    const __m256i r = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const unsigned nans = float_nans(x);
    return nans ? with_exact_lanes(r, x, nans, float_to_f16_lane) : r;
}
H2D_F16C_VARIANT(_ZGVdN8v_h2d_round_f16, __m256, __m256) {
    return _ZGVcN8v_h2d_round_f16_(x);
}
#endif
#if defined(__AVX512F__)
H2D_F16C_VARIANT(_ZGVeN16v_h2d_f16_to_float, __m512, __m512i) {
    const __m512 r = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x));
    const unsigned nans = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(x, _mm512_set1_epi32(0x7fff)), _mm512_set1_epi32(0x7c00));
    return nans ? with_exact_lanes(r, x, nans, f16_to_float_lane) : r;
}
H2D_F16C_VARIANT(_ZGVeN16v_h2d_float_to_f16, __m512i, __m512) {
    const __m512i r = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const unsigned nans = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return nans ? with_exact_lanes(r, x, nans, float_to_f16_lane) : r;
}
H2D_F16C_VARIANT(_ZGVeN16v_h2d_round_f16, __m512, __m512) {
    const __m512 r = _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const unsigned nans = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return nans ? with_exact_lanes(r, x, nans, round_f16_lane) : r;
}
#endif
// the functions themselves, for the loops GCC leaves scalar
H2D_F16C_VARIANT(h2d_f16_to_float, float, uint32_t) { return f16_to_float_bits(x); }
H2D_F16C_VARIANT(h2d_float_to_f16, uint32_t, float) { return float_to_f16_bits(x); }
H2D_F16C_VARIANT(h2d_round_f16, float, float) { return round_f16_bits(x); }
#undef H2D_F16C_VARIANT
}  // namespace f16c
H2D_FN inline float f16_to_float(uint16_t bits) { return h2d_f16_to_float(bits); }
H2D_FN inline uint16_t float_to_f16(float x) { return (uint16_t)h2d_float_to_f16(x); }
H2D_FN inline float round_f16(float x) { return h2d_round_f16(x); }
#else
H2D_FN inline float f16_to_float(uint16_t bits) { return f16_to_float_bits(bits); }
H2D_FN inline uint16_t float_to_f16(float x) { return (uint16_t)float_to_f16_bits(x); }
H2D_FN inline float round_f16(float x) { return round_f16_bits(x); }
#endif
#endif

// a NaN quietened, as the CPU's conversions between float types do
template <typename T> H2D_FN inline T quiet(T x) {
    using I = typename bits_of<T>::type;
    const I quiet_bit = I(1) << (std::numeric_limits<T>::digits - 2);
    return blend(x != x, bit_cast<T>(bit_cast<I>(x) | quiet_bit), x);
}

H2D_FN inline float bf16_to_float(uint16_t bits) { return bit_cast<float>((uint32_t)bits << 16); }
H2D_FN inline uint16_t float_to_bf16(float x) {
    uint32_t u = bit_cast<uint32_t>(x);
    // NaN: keep sign and payload; quieten it unless it came from a bf16 (low half zero, as
    // after a bitcast to bf16), whose bits XLA keeps as they are
    if (std::isnan(x)) return (uint16_t)((u >> 16) | ((u & 0xFFFF) ? 0x40 : 0));
    u += 0x7FFF + ((u >> 16) & 1);  // round to nearest, ties to even
    return (uint16_t)(u >> 16);
}
// float_to_bf16 then bf16_to_float, in float's 32 bits: through 16-bit lanes, GCC packs and
// unpacks each rounding (x * x + x in bf16: 0.59 ms per 1M elements, this 0.43)
H2D_FN inline float round_bf16(float x) {
    const uint32_t u = bit_cast<uint32_t>(x);
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    const uint32_t nan = (u & 0xFFFF0000u) | blend((u & 0xFFFFu) != 0, 0x400000u, 0u);
    return bit_cast<float>(blend(x != x, nan, rounded));
}

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
    H2D_FN static float to_float(uint32_t bits) {
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
    H2D_FN static uint32_t from_float(float x) {
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
H2D_FN inline float float_odd(double x) {
    float f = (float)x;
    if (!std::isfinite(f) || (double)f == x) return f;
    uint32_t u = bit_cast<uint32_t>(f);
    if (std::fabs((double)f) > std::fabs(x)) u -= 1;  // toward zero, then the sticky bit
    return bit_cast<float>(u | 1u);
}
// Rounding to f16 on the way to a small float, NaNs (small floats' codes) left as they are.
template <float (*Round)(float)> H2D_FN inline float unless_nan(float x) {
    return std::isnan(x) ? x : Round(x);
}
#define H2D_SMALL_FLOAT(name, E, M, B, K) \
    using name##_t = small_float<E, M, B, Top::K>; \
    H2D_FN inline float name##_to_float(uint8_t bits) { return name##_t::to_float(bits); } \
    H2D_FN inline uint8_t float_to_##name(float x) { return (uint8_t)name##_t::from_float(x); } \
    H2D_FN inline float round_##name(float x) { return name##_t::to_float(name##_t::from_float(x)); } \
    H2D_FN inline uint8_t double_to_##name(double x) { return (uint8_t)name##_t::from_float(float_odd(x)); } \
    H2D_FN inline double name##_to_double(uint8_t bits) { return name##_t::to_float(bits); }
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
H2D_FN inline float f8e8m0fnu_to_float(uint8_t bits) {
    if (bits == 0xFF) return std::numeric_limits<float>::quiet_NaN();
    float value = bit_cast<float>(bits ? (uint32_t)bits << 23 : 0x00400000u);
#if defined(__SSE__) && !defined(__CUDA_ARCH__)
    asm("" : "+x"(value));
#endif
    return value;
}
H2D_FN inline uint8_t float_to_f8e8m0fnu(float x) {
    const uint32_t u = bit_cast<uint32_t>(x);
    if ((u >> 31) || u >= 0x7F800000u || u == 0) return 0xFF;
    const uint32_t exponent = u >> 23, mantissa = u & 0x7FFFFFu;
    if (exponent == 0) return mantissa > 0x400000u ? 1 : 0;
    const uint32_t rounded = exponent + (mantissa >= 0x400000u);
    return rounded >= 0xFF ? 0xFF : (uint8_t)rounded;
}
H2D_FN inline float round_f8e8m0fnu(float x) { return f8e8m0fnu_to_float(float_to_f8e8m0fnu(x)); }
// To a double exactly: 2^-127 stays itself (a float denormal would be flushed on the way).
H2D_FN inline double f8e8m0fnu_to_double(uint8_t bits) {
    return bits == 0 ? 0x1p-127 : (double)f8e8m0fnu_to_float(bits);
}
// From a double, XLA rounds on the double's bits; below 2^-126 it gives 2^-127 for 2^-127
// itself, 2^-126 above it, and NaN below it.
H2D_FN inline uint8_t double_to_f8e8m0fnu(double x) {
    if (!(x > 0) || !std::isfinite(x)) return 0xFF;
    if (x < 0x1p-126) return x < 0x1p-127 ? 0xFF : x == 0x1p-127 ? 0 : 1;
    const uint64_t u = bit_cast<uint64_t>(x);
    const uint64_t rounded = (u >> 52) - 1023 + 127 + ((u & ((1ull << 52) - 1)) >= (1ull << 51));
    return rounded >= 0xFF ? 0xFF : (uint8_t)rounded;
}

// 2- and 4-bit integers live in a byte: wrap a result back to `Bits` bits.
template <int Bits, typename T> H2D_FN inline T wrap(T x) {
    if constexpr (std::is_signed_v<T>) {
        return (T)((int8_t)((uint8_t)x << (8 - Bits)) >> (8 - Bits));
    } else {
        return (T)(x & ((1u << Bits) - 1));
    }
}

}  // namespace h2d
