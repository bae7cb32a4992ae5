// hlo2dace's C++ helpers: rounding and float classification.
// (Included through h2d/ops.h; each topic header builds on the one before it.)
#pragma once

#include "bits.h"

namespace h2d {

// ------------------------------------------------------------------ rounding
// std::round and std::trunc do not vectorise (they must not raise inexact); nearbyint does:
// round half to even, then step away from zero where that rounded a half towards it
// (a - r is exact; infinities and NaN stay themselves, -0.3 gives -0.0)
template <typename T> H2D_FN inline T round_afz(T a) {
    const T r = std::nearbyint(a);
    const bool half_towards_zero =
        (std::fabs(a - r) == T(0.5)) & (std::fabs(r) < std::fabs(a));
    return blend(half_towards_zero, r + std::copysign(T(1), a), r);
}
template <typename T> H2D_FN inline T round_even(T a) { return std::nearbyint(a); }

// reduce_precision, XLA's bit-level algorithm (round to nearest even; below the reduced
// type's normal range: zero, above: infinity; NaN stays the input NaN), on the bits of a
// type with `SrcExponent` and `SrcMantissa` bits.
template <typename I, int SrcExponent, int SrcMantissa>
H2D_FN inline I reduce_precision_bits(I bits, int exponent_bits, int mantissa_bits) {
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
template <typename T> H2D_FN inline T reduce_precision(T x, int exponent_bits, int mantissa_bits) {
    using I = typename bits_of<T>::type;
    constexpr int mantissa = std::numeric_limits<T>::digits - 1;
    return bit_cast<T>(reduce_precision_bits<I, sizeof(T) * 8 - 1 - mantissa, mantissa>(
        bit_cast<I>(x), exponent_bits, mantissa_bits));
}
// f16 values (held in a float): XLA reduces the f16 bits themselves, so f16 denormals
// flush to zero when the reduced type's exponent is not wider than f16's.
H2D_FN inline float reduce_precision_f16(float x, int exponent_bits, int mantissa_bits) {
    return f16_to_float(reduce_precision_bits<uint16_t, 5, 10>(
        float_to_f16(x), exponent_bits, mantissa_bits));
}

}  // namespace h2d
