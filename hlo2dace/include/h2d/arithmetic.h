// hlo2dace's C++ helpers: arithmetic as XLA computes it: wrapping integers, division, remainder, power, min/max, selects.
// (Included through h2d/ops.h; each topic header builds on the one before it.)
#pragma once

#include "complex.h"

namespace h2d {

// ------------------------------------------------------------------ arithmetic
template <typename T> H2D_FN inline T add(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) return a || b;
    else if constexpr (is_int<T>) return (T)((uns<T>)a + (uns<T>)b);
    else return a + b;
}
template <typename T> H2D_FN inline T sub(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) return a != b;
    else if constexpr (is_int<T>) return (T)((uns<T>)a - (uns<T>)b);
    else return a - b;
}
template <typename T> H2D_FN inline T mul(T a, T b) {
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
template <typename T> H2D_FN inline T mul_add(T x, T y, T z) {
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
H2D_FN inline float mul_add_f16(float x, float y, float z) {
#if defined(__AVX512FP16__)
    // exact product, one rounding to double, one to f16: the double's rounding only loses
    // bits of a product below half an f16 unit of z, where z is the f16 result either way
    return (float)(_Float16)std::fma((double)x, (double)y, (double)z);
#else
    return round_f16(x * y) + z;
#endif
}
H2D_FN inline float f64_to_f16(double x) {
#if defined(__AVX512FP16__)
    return (float)(_Float16)x;
#else
    return (float)x;
#endif
}
template <typename T> H2D_FN inline T neg(T a) {
    if constexpr (is_int<T>) return (T)(uns<T>(0) - (uns<T>)a);
    else return -a;
}
// x / 0 = -1 (all bits set); INT_MIN / -1 = INT_MIN (XLA's semantics).
template <typename T> H2D_FN inline T div(T a, T b) {
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
template <typename T> H2D_FN inline T rem(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) return b ? false : a;
    else if constexpr (is_int<T>) {
        if (b == 0) return a;
        if constexpr (std::is_signed_v<T>) {
            if (b == (T)-1) return 0;
#ifndef __CUDA_ARCH__
            // By a constant 2^k, in masks: GCC 12 folds `a % 2 != 0` into a conversion of
            // `a` to bool, which its vectoriser cannot mix with other comparisons' masks
            // (a parity test kept the Collatz iteration's loop scalar, 9x XLA's time).
            if (__builtin_constant_p(b) && b > 0 && (b & (b - 1)) == 0) {
                const uns<T> low = (uns<T>)b - 1, bias = (uns<T>)(a >> (8 * sizeof(T) - 1)) & low;
                return (T)((uns<T>)a - (((uns<T>)a + bias) & (uns<T>)~low));
            }
#endif
        }
        return (T)(a % b);
    } else return std::fmod(a, b);
}
template <typename T> H2D_FN inline auto abs_(T a) {
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
template <typename T> H2D_FN inline T max_(T a, T b) {
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
template <typename T> H2D_FN inline T min_(T a, T b) {
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
template <typename T> H2D_FN inline T clamp(T lo, T x, T hi) { return min_(max_(lo, x), hi); }

template <typename T> H2D_FN inline T sign(T a) {
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
template <typename T> H2D_FN inline T pow_(T a, T b) {
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

}  // namespace h2d
