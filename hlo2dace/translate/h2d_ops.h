// StableHLO elementwise semantics in C++, as XLA computes them on the CPU.
// Prepended to every generated program (sdfg.append_global_code). Integer arithmetic
// goes through unsigned types so overflow wraps instead of being undefined behaviour;
// division, remainder and shifts give the spec's results for every input.
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace h2d {

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

// ------------------------------------------------------------------ 16-bit floats
inline float f16_to_float(uint16_t bits) { return (float)bit_cast<_Float16>(bits); }
inline uint16_t float_to_f16(float x) { return bit_cast<uint16_t>((_Float16)x); }
inline uint16_t double_to_f16(double x) { return bit_cast<uint16_t>((_Float16)x); }
inline float round_f16(float x) { return (float)(_Float16)x; }

inline float bf16_to_float(uint16_t bits) { return bit_cast<float>((uint32_t)bits << 16); }
inline uint16_t float_to_bf16(float x) {
    uint32_t u = bit_cast<uint32_t>(x);
    if (std::isnan(x)) return (uint16_t)((u >> 16) | 0x40);  // keep sign and payload, quiet
    u += 0x7FFF + ((u >> 16) & 1);  // round to nearest, ties to even
    return (uint16_t)(u >> 16);
}
inline float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }
// f64 -> bf16 in one rounding: round the double's mantissa to bf16's 8 bits first, so the
// following double -> float conversion is exact (except below float's normal range).
inline uint16_t double_to_bf16(double x) {
    if (std::isnan(x)) return float_to_bf16((float)x);
    uint64_t u = bit_cast<uint64_t>(x);
    u += ((uint64_t)1 << 44) - 1 + ((u >> 45) & 1);
    u &= ~(((uint64_t)1 << 45) - 1);
    return float_to_bf16((float)bit_cast<double>(u));
}

// 2- and 4-bit integers live in a byte: wrap a result back to `Bits` bits.
template <int Bits, typename T> inline T wrap(T x) {
    if constexpr (std::is_signed_v<T>) {
        return (T)((int8_t)((uint8_t)x << (8 - Bits)) >> (8 - Bits));
    } else {
        return (T)(x & ((1u << Bits) - 1));
    }
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
    } else return a * b;
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
    } else return a / b;
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
    else return std::abs(a);
}
// NaN-propagating maximum/minimum; for complex numbers, lexicographic (real, imag).
template <typename T> inline T max_(T a, T b) {
    if constexpr (is_complex<T>) {
        if (std::isnan(a.real()) || std::isnan(a.imag())) return a;
        if (std::isnan(b.real()) || std::isnan(b.imag())) return b;
        return (a.real() > b.real() || (a.real() == b.real() && a.imag() >= b.imag())) ? a : b;
    } else if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        if (a == b) return std::signbit(a) ? b : a;  // max(-0, +0) = +0
        return a > b ? a : b;
    } else return a > b ? a : b;
}
template <typename T> inline T min_(T a, T b) {
    if constexpr (is_complex<T>) {
        if (std::isnan(a.real()) || std::isnan(a.imag())) return a;
        if (std::isnan(b.real()) || std::isnan(b.imag())) return b;
        return (a.real() < b.real() || (a.real() == b.real() && a.imag() <= b.imag())) ? a : b;
    } else if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        if (a == b) return std::signbit(a) ? a : b;  // min(-0, +0) = -0
        return a < b ? a : b;
    } else return a < b ? a : b;
}
template <typename T> inline T clamp(T lo, T x, T hi) { return min_(max_(x, lo), hi); }

template <typename T> inline T sign(T a) {
    if constexpr (is_complex<T>) {
        using R = typename T::value_type;
        if (std::isnan(a.real()) || std::isnan(a.imag()))
            return T(std::numeric_limits<R>::quiet_NaN(), std::numeric_limits<R>::quiet_NaN());
        R m = std::abs(a);
        return m == 0 ? T(0, 0) : a / m;
    } else if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a) || a == 0) return a;
        return a > 0 ? T(1) : T(-1);
    } else if constexpr (std::is_signed_v<T>) {
        return (T)((a > 0) - (a < 0));
    } else {
        return (T)(a != 0);
    }
}

// Integer power by squaring; negative exponents give 0 except for bases 1 and -1.
template <typename T> inline T pow_(T a, T b) {
    if constexpr (is_int<T>) {
        if constexpr (std::is_signed_v<T>) {
            if (b < 0) {
                if (a == 1) return 1;
                if (a == -1) return (b & 1) ? (T)-1 : (T)1;
                return 0;
            }
        }
        T result = 1;
        uns<T> e = (uns<T>)b;
        while (e) {
            if (e & 1) result = mul(result, a);
            a = mul(a, a);
            e >>= 1;
        }
        return result;
    } else if constexpr (std::is_same_v<T, bool>) {
        return a || !b;
    } else return std::pow(a, b);
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
// The same for narrow (2/4-bit) integers stored in a byte.
template <int Bits, typename T> inline T shl_n(T a, T b) {
    if ((uint8_t)b >= (uint8_t)Bits && !(std::is_signed_v<T> && b < 0)) return 0;
    if (std::is_signed_v<T> && b < 0) return 0;
    return wrap<Bits>((T)((uint8_t)a << (uint8_t)b));
}
template <int Bits, typename T> inline T shr_logical_n(T a, T b) {
    if (b < 0 || (uint8_t)b >= Bits) return 0;
    return (T)((uint8_t)(a & ((1u << Bits) - 1)) >> (uint8_t)b);
}
template <int Bits, typename T> inline T shr_arithmetic_n(T a, T b) {
    if (b < 0 || (uint8_t)b >= Bits) return (T)(a < 0 ? -1 : 0);
    return (T)(a >> b);
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
template <typename T> inline T round_afz(T a) { return std::round(a); }
template <typename T> inline T round_even(T a) { return std::nearbyint(a); }

// reduce_precision, XLA's bit-level algorithm (round to nearest even, NaN kept NaN).
template <typename T> inline T reduce_precision(T x, int exponent_bits, int mantissa_bits) {
    using I = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    constexpr int src_mantissa = std::numeric_limits<T>::digits - 1;
    constexpr int src_exponent = sizeof(T) * 8 - 1 - src_mantissa;
    I bits = bit_cast<I>(x);
    if (mantissa_bits < src_mantissa) {
        int drop = src_mantissa - mantissa_bits;
        I last_kept = ((I)1) << drop;
        I half_minus_one = (last_kept >> 1) - 1;
        I kept_lsb = (bits >> drop) & 1;
        bits += half_minus_one + kept_lsb;
        bits &= ~(last_kept - 1);
    }
    if (exponent_bits < src_exponent) {
        I sign = bits & (((I)1) << (sizeof(T) * 8 - 1));
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
    T result = bit_cast<T>(bits);
    return (std::isnan(x) && mantissa_bits > 0) ? x : result;
}

// ------------------------------------------------------------------ transcendental
template <typename T> inline T rsqrt(T a) { return T(1) / std::sqrt(a); }
template <typename T> inline T logistic(T a) { return T(1) / (T(1) + std::exp(-a)); }
template <typename T> inline T expm1_(T a) {
    if constexpr (is_complex<T>) return std::exp(a) - T(1);
    else return std::expm1(a);
}
template <typename T> inline T log1p_(T a) {
    if constexpr (is_complex<T>) return std::log(a + T(1));
    else return std::log1p(a);
}
template <typename T> inline T cbrt_(T a) { return std::cbrt(a); }
template <typename T> inline bool is_finite(T a) { return std::isfinite(a); }

// ------------------------------------------------------------------ comparison
// TOTALORDER: -NaN < -Inf < ... < -0 < +0 < ... < +Inf < +NaN, by the sign-magnitude bits.
template <typename T> inline auto total_order_key(T a) {
    using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
    I i = bit_cast<I>(a);
    return (I)(i ^ ((i >> (sizeof(I) * 8 - 1)) & std::numeric_limits<I>::max()));
}

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
